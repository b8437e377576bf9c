"""Click commands: parse options, call the library, print a table or JSON."""
