"""What a run works on: the instances and tasks a recipe selects, and the images they start from (README.md)."""
