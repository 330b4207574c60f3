#!/usr/bin/env bash
# Measures `turnback push` to a real S3 server on loopback: the first push of a snapshot of
# a large tree, then an incremental push after one changed file; bytes and seconds of each.
#
#   scripts/bench-push.sh TREE [TURNBACK] [GARAGE]
#
# TREE is never modified: the workspace is a hard-linked copy of it (`cp -al`), and the one
# file changed there is replaced by rename, which breaks only that file's link. TURNBACK
# defaults to target/release/turnback, GARAGE to `garage` on PATH. Garage (single node,
# lmdb, no compression) runs in a temporary directory on 127.0.0.1 and is stopped at the
# end; everything is removed afterwards.
set -euo pipefail
tree=${1:?usage: scripts/bench-push.sh TREE [TURNBACK] [GARAGE]}
cd "$(dirname "$0")/.."
tb=$(realpath "${2:-target/release/turnback}")
garage=${3:-$(command -v garage)}
# Hard links need one file system: WORK_DIR (default: $TMPDIR or /tmp) must be on the tree's.
work=$(mktemp -d "${WORK_DIR:-${TMPDIR:-/tmp}}/bench-push.XXXXXX")
trap 'kill "${gpid:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc=$(port); s3=$(port)
cat > "$work/garage.toml" <<TOML
metadata_dir = "$work/garage/meta"
data_dir = "$work/garage/data"
db_engine = "lmdb"
replication_factor = 1
compression_level = "none"
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"
TOML
chmod 600 "$work/garage.toml"
export AWS_ACCESS_KEY_ID="GK$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export AWS_SECRET_ACCESS_KEY="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
GARAGE_DEFAULT_ACCESS_KEY=$AWS_ACCESS_KEY_ID GARAGE_DEFAULT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY \
  GARAGE_DEFAULT_BUCKET=bench RUST_LOG=warn \
  "$garage" -c "$work/garage.toml" server --single-node --default-bucket > "$work/garage.log" 2>&1 & gpid=$!
for _ in $(seq 300); do
  curl -s -o /dev/null "http://127.0.0.1:$s3/" && break
  sleep 0.2
done
sleep 1

export TURNBACK_HOME="$work/store" TURNBACK_KEY=$(head -c 32 /dev/urandom | base64)
cp -al "$tree" "$work/ws"
cd "$work/ws"
"$tb" init > /dev/null
# The whole tree in one first snapshot.
sed -i 's/^first-max-size = .*/first-max-size = "8 GiB"/; s/^first-max-files = .*/first-max-files = 1000000/' "$TURNBACK_HOME/settings.toml"
"$tb" remote add bench s3://bench/turnback --endpoint "http://127.0.0.1:$s3" --region garage > /dev/null
"$tb" --session bench turn begin --prompt "first" --wait-ms 600000 > /dev/null
"$tb" --session bench turn end > /dev/null

measure() {
  local start end
  start=$(date +%s.%N)
  "$tb" --json --session bench push bench > "$work/push.json"
  end=$(date +%s.%N)
  python3 - "$1" "$start" "$end" "$work/push.json" <<'PY'
import json, sys
label, start, end, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r = json.load(open(path))["pushed"][0]
print(f"{label}: {end - start:.2f} s, {r['bytesUploaded']} bytes ({r['bytesUploaded'] / 1e6:.2f} MB) uploaded "
      f"({r['objectsUploaded']} of {r['objects']} objects in {r['packsUploaded']} packs, "
      f"{r['recordsUploaded']} turn records)")
PY
}
measure "first push"
# One changed file, replaced by rename so the original tree keeps its bytes.
find . -name '*.c' -size +4k | sort > "$work/candidates"
changed=$(head -n 1 "$work/candidates")
cp "$changed" "$changed.new" && printf '/* changed */\n' >> "$changed.new" && mv "$changed.new" "$changed"
"$tb" --session bench turn begin --prompt "one change" --wait-ms 600000 > /dev/null
"$tb" --session bench turn end > /dev/null
measure "incremental push (one changed file)"
echo "bucket: $(du -sh "$work/garage/data" | cut -f1) in Garage's data directory"
