# Fixtures for tests/bad_input/60_model.cases (sourced by bad_input_test.sh: $FX, $CNN): a spec of
# several tokens, which a case's space-split arguments cannot carry, in a config file.
mkdir -p "$FX/model"
printf 'model = "conv3x3:4/p1 bn relu fc:10"\n' >"$FX/model/bn.toml"
