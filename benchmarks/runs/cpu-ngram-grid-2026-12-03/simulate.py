"""Replays b11434's n-gram drafters over the greedy token sequences in tokens.json.

At temperature 0 a speculative server's output equals plain decoding's (verification keeps
the target's argmax), so what each step drafts and accepts is a function of the token
sequences, the drafter and its lengths alone. This re-implements, line for line, what the
product's engine does per request (llama.cpp b11434):
- tools/server/server-context.cpp: common_speculative_begin(prompt) when the prompt is
  evaluated; each step drafts from (prompt + generated except the last sampled token, the last
  sampled token), the draft truncated to min(n_ctx - n_tokens - 2, n_remaining - 1);
  common_speculative_accept(n) only after a verified (non-empty) draft.
- common/ngram-mod.{h,cpp} + speculative.cpp common_speculative_impl_ngram_mod: one hash pool
  of 4 Mi entries shared by every request of the server (idx = fold(res*6364136223846793005 +
  tok) mod 4 Mi, last write wins), prompt n-grams added at begin, generated ones in chunks
  (only once 32 new tokens are waiting), chained lookups of n_max tokens dropped below n_min,
  pool reset after 5 drafts in a row with under 25 % accepted (of the untruncated draft).
- common/ngram-map.cpp common_ngram_simple_draft (ngram-simple): the most recent earlier
  occurrence of the last size_n tokens in this request's context, its next size_m tokens.
Request order follows agent backend bench: a server gets the warm-up ("Hi", 4 tokens) then the
prompts; --one-at-a-time starts a new server per profile and round (so per repeat), the
side-by-side mode (the H200 run) sends each prompt's repeats to one server in a row.
"""
from __future__ import annotations

MASK = (1 << 64) - 1
POOL = 4 * 1024 * 1024
MUL = 6364136223846793005
N_CTX = 8192


class NgramMod:
    def __init__(self, n_match: int, n_min: int, n_max: int):
        self.n, self.n_min, self.n_max = n_match, n_min, n_max
        self.pool: dict[int, int] = {}
        self.n_low = 0
        self.resets = 0

    def idx(self, toks, at):
        res = 0
        for t in toks[at:at + self.n]:
            res = (res * MUL + t) & MASK
        return res % POOL

    def add(self, toks, at):
        self.pool[self.idx(toks, at)] = toks[at + self.n]

    def begin(self, prompt):
        self.i_last = 0
        self.n_draft_last = 0
        n = self.n
        if len(prompt) < n:
            return
        for i in range(len(prompt) - n):
            self.add(prompt, i)
        self.i_last = len(prompt) - n
        # occupancy reset at 25 % of 4 Mi entries: never reached by these prompts
        assert len(self.pool) < POOL // 4

    def draft(self, ctx, id_last):
        self.n_draft_last = 0
        n, cur = self.n, len(ctx)
        if cur < n:
            return []
        if self.i_last + 32 < cur:
            for i in range(self.i_last, cur - n):
                self.add(ctx, i)
            self.i_last = cur - n
        key = list(ctx[cur - n + 1:]) + [id_last]
        out = []
        for i in range(self.n_max):
            tok = self.pool.get(self.idx(key, i), -1)
            if tok == -1:
                if i < self.n_min:
                    return []
                break
            key.append(tok)
            out.append(tok)
        self.n_draft_last = len(out)
        return out

    def accept(self, n_accepted):
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.pool.clear()
                    self.resets += 1
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0


class NgramSimple:
    """ngram-simple (stateless): size_n lookup, size_m draft."""

    def __init__(self, size_n: int, size_m: int):
        self.n, self.m = size_n, size_m
        self.resets = 0

    def begin(self, prompt):
        pass

    def draft(self, ctx, id_last):
        n, m, cur = self.n, self.m, len(ctx)
        if cur <= n + m + 1:
            return []
        pattern = list(ctx[cur - n + 1:]) + [id_last]
        match = 0
        for j in range(cur - n - 1, 0, -1):
            if ctx[j] == pattern[0] and list(ctx[j:j + n]) == pattern:
                match = j
                break
        if match == 0:
            return []
        copy = min(m, cur - (match + n))
        if copy < n:
            return []
        return list(ctx[match + n:match + n + copy])

    def accept(self, n_accepted):
        pass


def run_request(drafter, prompt, truth, max_tokens):
    """One request: returns (tokens, steps, drafted, accepted, drafting steps, histogram)."""
    drafter.begin(prompt)
    gen = [truth[0]]  # the first token comes from the prompt's evaluation
    steps = drafted = accepted = drafting_steps = 0
    sizes = []
    while len(gen) < len(truth):
        n_tokens = len(prompt) + len(gen) - 1  # the last sampled token is not in the cache yet
        n_draft_max = min(N_CTX - n_tokens - 2, max_tokens - len(gen) - 1)
        draft = []
        if n_draft_max > 0:
            draft = drafter.draft(prompt + gen[:-1], gen[-1])
            draft = draft[:n_draft_max]
        p = len(gen)
        k = 0
        if draft:
            while k < len(draft) and p + k < len(truth) - 1 and draft[k] == truth[p + k]:
                k += 1
            drafter.accept(k)
            drafted += len(draft)
            accepted += k
            drafting_steps += 1
            sizes.append(len(draft))
        gen.extend(truth[p:p + k + 1])
        steps += 1
    assert gen == truth
    return len(gen), steps, drafted, accepted, drafting_steps, sizes


def order(names, mode, repeats):
    if mode == "side-by-side":
        return [(nm, r) for nm in names for r in range(repeats)]
    return [(nm, r) for r in range(repeats) for nm in names]  # a fresh server per repeat


def simulate(make, data, names, mode="one-at-a-time", repeats=1, max_tokens=1200):
    P = data["prompts"]
    tot = dict(tokens=0, steps=0, drafted=0, accepted=0, drafting_steps=0, resets=0)
    per = {}
    drafter = None
    last_round = None
    for nm, r in order(names, mode, repeats):
        if drafter is None or (mode == "one-at-a-time" and r != last_round):
            if drafter is not None:
                tot["resets"] += drafter.resets
            drafter = make()
            w = P["warm-up"]
            run_request(drafter, w["prompt_tokens"], w["tokens"], 4)
            last_round = r
        t, s, d, a, ds, _ = run_request(drafter, P[nm]["prompt_tokens"], P[nm]["tokens"],
                                        max_tokens)
        for key, v in zip(("tokens", "steps", "drafted", "accepted", "drafting_steps"),
                          (t, s, d, a, ds), strict=True):
            tot[key] += v
            per.setdefault(nm, dict(tokens=0, steps=0, drafted=0, accepted=0,
                                    drafting_steps=0))[key] += v
    tot["resets"] += drafter.resets
    return tot, per


class Combo:
    """Several --spec-type values on one server: b11434 tries them in its fixed order
    (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ...) and takes the first draft;
    every drafter sees begin(), the one that drafted gets accept() (the others is_other)."""

    def __init__(self, *impls):
        self.impls = impls
        self.last = None

    @property
    def resets(self):
        return sum(i.resets for i in self.impls)

    def begin(self, prompt):
        for i in self.impls:
            i.begin(prompt)

    def draft(self, ctx, id_last):
        self.last = None
        for i in self.impls:
            d = i.draft(ctx, id_last)
            if d:
                self.last = i
                return d
        return []

    def accept(self, n):
        if self.last is not None:
            self.last.accept(n)


def make_drafter(cfg):
    """cfg: {"type": "ngram-mod", n_match, n_min, n_max} or {"type": "ngram-simple+ngram-mod",
    size_n, size_m, and the mod's lengths} (a preset's extra_flags add ngram-simple to the
    ngram profile's ngram-mod: --spec-type appends in b11434)."""
    def mod():
        return NgramMod(cfg["n_match"], cfg["n_min"], cfg["n_max"])

    if cfg["type"] == "ngram-mod":
        return mod()
    if cfg["type"] == "ngram-simple+ngram-mod":
        return Combo(NgramSimple(cfg["size_n"], cfg["size_m"]), mod())
    if cfg["type"] == "ngram-simple":
        return NgramSimple(cfg["size_n"], cfg["size_m"])
    raise ValueError(cfg["type"])
