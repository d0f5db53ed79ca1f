/* house.py's bad tree: a name a/ holds too (rule "names"). */
