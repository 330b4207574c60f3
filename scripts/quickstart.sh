#!/usr/bin/env bash
# Builds turnback and runs its main job in a throwaway workspace and store:
# checkpointed create/edit/delete, an agent-style stage/commit, listing, inspection
# and a deep verification. Touches nothing outside a fresh temp directory.
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
id=$("$tb" checkpoints --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoints"][1]["checkpointId"])' 2>/dev/null || true)
if [ -n "$id" ]; then step "turnback inspect $id"; "$tb" inspect "$id"; fi
step "turnback verify --deep";               "$tb" verify --deep
step "grep -r hello $TURNBACK_HOME   # plaintext never enters the store"
if grep -rq hello "$TURNBACK_HOME"; then echo "FOUND plaintext (this is a bug)"; exit 1; else echo "(no match)"; fi
