#!/bin/sh
# One arm of the single-GPU A/B, as spec-ab runs it: prime the server's prefix cache, climb the ladder with
# Locust, then leave runs/$RUN/.$ARM-done so the arm's server stops and frees the GPU for the next arm.
# Environment: ARM, TARGET, RUN and the load (PROMPTS, MAX_TOKENS, SEED, LEVELS, STAGE_TIME, WARMUP,
# METRICS_INTERVAL, PROCESSES) from docker/.env.
set -u
out="runs/$RUN/$ARM"
rm -rf "$out" && mkdir -p "$out"
set --
if [ "$PROCESSES" != 1 ]; then set -- --processes "$PROCESSES"; fi
status=0
# The baseline also answers a few prompts twice: its noise floor for the answer gate (spec-ab's self-check).
check=""
if [ "$ARM" = baseline ]; then
    check="--self-check 8 --self-check-out $out --max-tokens $MAX_TOKENS --seed $SEED"
fi
# shellcheck disable=SC2086  # $check is words
spec-prime --host "$TARGET" --prompts "$PROMPTS" --name "$ARM" $check || status=$?
if [ "$status" -eq 0 ]; then
    locust -f "$(spec-locustfile sweep)" --headless --host "$TARGET" --csv "$out/r0" \
        --prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --seed "$SEED" --levels "$LEVELS" \
        --stage-time "$STAGE_TIME" --warmup "$WARMUP" --metrics-interval "$METRICS_INTERVAL" "$@" \
        || status=$?
    # Locust exits 1 when a request failed: data for the verdict (spec-ab reads it so), not a broken run.
    if [ "$status" -eq 1 ]; then status=0; fi
fi
touch "runs/$RUN/.$ARM-done"
exit "$status"
