# Shared by the train-dist --gravac tests (sourced after common.sh).

# same_gravac_decisions LOG EPOCHS: both ranks of a 2-rank run logged (with -v) one
# digest of their GraVAC decisions per epoch, and the two agree in every epoch.
same_gravac_decisions() {
    local log=$1 epochs=$2 lines e n
    lines=$(sed -nE 's/^train-dist\[[01]\]: debug: rank ([01]): gravac epoch ([0-9]+): steps at each factor (.*); decisions digest ([0-9a-f]{16})$/\2 \1 \3 \4/p' "$log" | sort)
    [ "$(echo "$lines" | wc -l)" = $((2 * epochs)) ] || fail "expected $epochs epochs x 2 ranks of GraVAC digests: $lines"
    for ((e = 0; e < epochs; e++)); do
        n=$(echo "$lines" | awk -v e="$e" '$1 == e {$2 = ""; print}' | sort -u | wc -l)
        [ "$n" = 1 ] || fail "ranks took different GraVAC decisions in epoch $e: $(echo "$lines" | grep "^$e ")"
    done
}
