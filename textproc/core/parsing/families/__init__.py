"""The tool-call and reasoning format families: one module each, found by a package scan.

A module here declares its formats in a ``FORMATS`` tuple of
:class:`~textproc.core.parsing.declaration.ToolFormat` /
:class:`~textproc.core.parsing.declaration.ReasoningFormat` values
(:mod:`textproc.core.parsing.formats` collects them). Adding a family is adding a module.
"""
