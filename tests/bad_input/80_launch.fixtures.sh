# Data for tests/bad_input/80_launch.cases: the idx fixture with one training label changed (same
# sizes and shape), so that only the data digest tells the ranks' data sets apart.
cp -r "$FX/idx" "$FX/idx_other" && printf '\x05' | dd of="$FX/idx_other/train-labels-idx1-ubyte" bs=1 seek=8 conv=notrunc 2>/dev/null
cmp -s "$FX/idx/train-labels-idx1-ubyte" "$FX/idx_other/train-labels-idx1-ubyte" && { echo "FAIL - idx_other equals idx"; exit 1; }
true
