"""Regex tree -> byte DFA, the stage between the regex and the index: ``dfa`` (the NFA and the
minimal DFA over UTF-8 bytes, built whole) and ``lazy`` (the DFA built on demand, a row when
first read: a first mask's few states). Importing this package loads neither.
"""
