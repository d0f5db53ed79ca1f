/* house.py's bad tree: a name b/ holds too (rule "names"). */
