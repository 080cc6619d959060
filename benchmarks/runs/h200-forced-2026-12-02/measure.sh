# Forced-reply replay measurements (issue 23), sourced by benchmarks/h200-2026-12-02/device.sh
# through DEVICE_MEASURE (see this folder's device.sh); they replace its measure_smol/measure_big.

# >>> MEASUREMENT COMMANDS (issue 23: forced-reply replay of the agent's own turns). A copy of
# every result is kept under $T/keep, so a replay cut by a call's end carries on (--resume) in
# the next call on the same machine.

turns() {  # turns NAME PRESET LIMIT ARGS...: one forced replay, resumed when a copy is kept
  local name=$1 preset=$2 limit=$3; shift 3
  mkdir -p "$T/keep"
  local resume=()
  [[ -f $T/keep/$name.json ]] && resume=(--resume "$T/keep/$name.json")
  step "$name" "$limit" "$PY" benchmarks/agent_turns.py --preset "$preset" --forced -q \
    --json "$T/keep/$name.json" "${resume[@]}" "$@"
  [[ -f $T/keep/$name.json ]] && cp "$T/keep/$name.json" "$OUT/$name.json"
}

qwen_template() {  # the Qwen2.5-7B template shipped with the engine (it has a tool-call format)
  ls "$DFLASH_AGENT_HOME"/cache/engines/*/templates/Qwen-Qwen2.5-7B-Instruct.jinja 2>/dev/null \
    | head -1
}

big74q_preset() {  # the 7.4 B shape with Qwen2.5-7B's template, once per home; 1 when none
  local tmpl
  tmpl=$(qwen_template)
  [[ -n $tmpl ]] || { say "no Qwen2.5 template in the engine"; return 1; }
  grep -q '^\[big74q\]' "$DFLASH_AGENT_HOME/config/presets.toml" || \
    cat >> "$DFLASH_AGENT_HOME/config/presets.toml" <<EOF

[big74q]
description = "the 7.4 B llama shape with Qwen2.5-7B's chat template (a tool-call format)"
model = "$BIG/target.gguf"
draft = "$BIG/draft.gguf"
profile = "dflash"
ctx_size = 16384
extra_flags = ["--chat-template-file", "$tmpl"]

[big74q.sampling]
temperature = 0.0

[big74q.server]
gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"
EOF
}

measure_big() {
  big74q_preset || return 0
  turns forced-big74 big74q 540 --profiles baseline,ngram --protocols text,json,native \
    --sessions vercheck-prereleases inventory-report
}

measure_smol() {
  turns forced-smol smol-v1 540 --profiles baseline,ngram,dflash,dflash+ngram \
    --protocols text,json --sessions vercheck-prereleases inventory-report todo-due-dates \
    --ctx-size 16384
}
