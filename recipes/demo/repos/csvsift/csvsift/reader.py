"""CSV files as lists of dictionaries."""

import csv


def read_records(path, delimiter=",", encoding="utf-8"):
    """Rows of the CSV file at ``path`` as dicts keyed by the header row.

    Header names are stripped of surrounding whitespace; values are kept as they are.
    """
    with open(path, newline="", encoding=encoding) as handle:
        reader = csv.DictReader(handle, delimiter=delimiter)
        if reader.fieldnames is not None:
            reader.fieldnames = [name.strip() for name in reader.fieldnames]
        return [dict(row) for row in reader]
