"""Regex text, written and read: ``parts`` (the building blocks the schema and the plans write
regexes from: JSON string characters, literals, bounded repetition, a schema ``pattern``
translated into serialised JSON) and ``syntax`` (Python ``re`` syntax -> the regex tree the
automaton is built from). Importing this package loads neither.
"""
