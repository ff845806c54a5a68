"""The one error type for bad user input (files, columns, options).

Entry points (`train.py`, `evaluate.py`, `python -m datamodules.describe`) catch
it, print its message on one line and exit with status 2, so a user sees what
was wrong with which file, column or option, and nothing else.
"""


class InputError(ValueError):
    """Bad input from the user: names the file, column or option and what was expected."""
