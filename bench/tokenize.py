#!/usr/bin/env python3
"""Tokenizer pool throughput: the service's workers vs HF ``tokenizers``.

    .venv/bin/python bench/tokenize.py [--quick] [--json PATH] [--workers 1,2] [--plot PNG] [--model-dir DIR]

What it measures and how: ``bench/_tokenize_pool.py`` (the code lives there).

This file only starts it, because it is named like the standard library's ``tokenize``
(``textproc bench tokenize`` runs ``bench/tokenize.py``): while a script in ``bench/`` runs,
``bench/`` is first on ``sys.path``, and ``import tokenize`` (done by ``linecache``, which
``traceback`` and ``logging`` import) finds this file. Imported under any name but
``__main__``, it loads the real standard-library module and hands that over instead.
"""

if __name__ != "__main__":  # imported as the stdlib's ``tokenize``: hand over the real one
    import importlib.util as _ilu
    import os as _os
    import sys as _sys
    import sysconfig as _sysconfig

    _spec = _ilu.spec_from_file_location(
        __name__, _os.path.join(_sysconfig.get_paths()["stdlib"], "tokenize.py"))
    assert _spec is not None and _spec.loader is not None
    _real = _ilu.module_from_spec(_spec)
    _sys.modules[__name__] = _real
    _spec.loader.exec_module(_real)
else:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _tokenize_pool import main

    raise SystemExit(main())
