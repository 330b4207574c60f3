#!/usr/bin/env bash
# Builds turnback and runs its main job in a throwaway workspace and store: checkpointed
# create/edit, an agent-style stage/commit, a person's edit, a rollback that leaves the
# person's edit alone, undoing that rollback, a whole turn with its diff and a rewind of
# it, and a deep verification. Touches nothing outside a fresh temp directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin turnback
tb="$root/target/release/turnback"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TURNBACK_HOME="$tmp/store" XDG_CONFIG_HOME="$tmp/config"
unset TURNBACK_KEY TURNBACK_KEY_FILE TURNBACK_SESSION
mkdir -p "$tmp/ws" && cd "$tmp/ws"
step() { printf '\n$ %s\n' "$*"; }

step turnback init;                          "$tb" init
step "echo ... | turnback fs create src/main.rs"
printf 'fn main() {\n    println!("hi");\n}\n' | "$tb" fs create src/main.rs
step "turnback fs edit src/main.rs --old '\"hi\"' --new '\"hello\"'"
"$tb" fs edit src/main.rs --old '"hi"' --new '"hello"'
step 'op=$(turnback stage notes.md)   # an agent is about to write notes.md with its own tool'
op=$("$tb" stage notes.md); echo "$op"
echo "# Notes" > notes.md
step 'turnback commit "$op"';                "$tb" commit "$op"
step turnback checkpoints;                   "$tb" checkpoints
step "echo \"A person's own line.\" >> notes.md   # a person edits notes.md by hand"
echo "A person's own line." >> notes.md
step "turnback rollback --turn 0   # preview: the person's edit is a conflict, the rest is eligible"
"$tb" rollback --turn 0 || true
plan=$("$tb" rollback --turn 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["planId"])' || true)
step "turnback rollback --turn 0 --apply --plan $plan"
"$tb" rollback --turn 0 --apply --plan "$plan" || true
step "ls; cat notes.md   # src/main.rs is gone (the agent created it); notes.md keeps the person's line"
ls; cat notes.md
undo=$("$tb" checkpoints --json | python3 -c 'import json,sys; print([c for c in json.load(sys.stdin)["checkpoints"] if c["mutation"]["kind"]=="rollback"][-1]["checkpointId"])')
step "turnback rollback $undo --apply   # undo the rollback itself"
"$tb" rollback "$undo" --apply
step "cat src/main.rs"
cat src/main.rs
step 'turnback turn begin --prompt "add a greeting"   # a whole turn: snapshot at its start, prompt in the history'
"$tb" turn begin --prompt "add a greeting" >/dev/null
step "turnback history append   # the agent's reply, encrypted too"
printf '{"role":"assistant","content":"Added greeting.txt."}\n' | "$tb" history append
printf 'hello\n' > greeting.txt; printf '// tweaked by the agent\n' >> src/main.rs
step "turnback turn end && turnback diff --stat   # what the turn changed"
"$tb" turn end; "$tb" diff --stat
step "turnback rewind --to 1 --apply   # the workspace (and the history) back to the start of that turn"
"$tb" rewind --to 1 --apply || true
step "ls; cat src/main.rs"
ls; cat src/main.rs
step "turnback verify --deep";               "$tb" verify --deep
step "grep -r hello $TURNBACK_HOME   # plaintext never enters the store"
if grep -rq hello "$TURNBACK_HOME"; then echo "FOUND plaintext (this is a bug)"; exit 1; else echo "(no match)"; fi
