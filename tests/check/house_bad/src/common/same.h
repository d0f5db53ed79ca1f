/* house.py's bad tree: a name src/host holds too (rule "names"). */
