/* house.py's bad tree: a .c file at the top of src/capture, not in a
 * source's folder (rule "sources"); it is never compiled. */
