"""Millrace's benchmarks, the soak run and the load generator; not part of the product.

One module per benchmark (``python -m bench.<name>``, a ``make bench-*`` target each; see
docs/performance.md), ``soak`` (docs/reliability.md), ``perf`` (the load generator behind
``manage.py perf``), the helpers they share (``common``) and the steps they run inside
Django in a child process (``store``, ``console_setup``). These modules import the product
packages; none of those imports this package but the ``manage.py perf`` wrapper
(tests/test_layering.py). The image and the installed package do not include it.
"""
