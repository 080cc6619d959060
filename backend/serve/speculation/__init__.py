"""Speculation that pays: what a speculative step costs and the choice it makes
(:mod:`~backend.serve.speculation.costs`, pure), what is stored of it
(:mod:`~backend.serve.speculation.store`), the acceptance probe
(:mod:`~backend.serve.speculation.probe`), and the per-request controllers behind one face
(:mod:`~backend.serve.speculation.control`: :mod:`~backend.serve.speculation.draft_cap`,
:mod:`~backend.serve.speculation.ngram_guard`). The launch's decision that uses them is
:mod:`backend.serve.tuning`."""
