/* house.py's bad tree: a name src/common holds too (rule "names"). */
