"""The text format: tokenizer and parser, printer (parse(print(p)) == p), loading a program file,
and the reprint of an equation that error messages show."""
