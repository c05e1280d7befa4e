#!/bin/sh
# The single-GPU profile's vLLM server: `vllm serve ARGS...` until its arm's sweep leaves $DONE_FILE, then
# a clean stop and exit 0, so that compose starts the next arm's server on the GPU this one frees.
set -u
rm -f "$DONE_FILE"  # a previous run's
vllm serve "$@" &
server=$!
while [ ! -e "$DONE_FILE" ]; do
    if ! kill -0 "$server" 2>/dev/null; then
        echo "serve-until-done: vllm serve exited before the sweep finished" >&2
        exit 1
    fi
    sleep 2
done
kill -TERM "$server"
wait "$server"
exit 0
