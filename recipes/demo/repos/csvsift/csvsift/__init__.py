"""Read, page through and summarise CSV exports."""

from csvsift.paging import Page, paginate
from csvsift.reader import read_records
from csvsift.stats import mean, median

__all__ = ["Page", "mean", "median", "paginate", "read_records"]
__version__ = "1.2.0"
