"""Data sources: 2-D toy mixtures, offline digits, image folders and TFDS datasets."""

__all__: list[str] = []
