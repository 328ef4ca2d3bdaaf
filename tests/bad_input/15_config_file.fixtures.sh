# Config files for tests/bad_input/15_config_file.cases (sourced by bad_input_test.sh: $FX, $CNN).
# A build without toml++ refuses every --config alike: its cases are skipped, saying so
# (tests/config_file_test.sh checks that refusal there).
if ! "$CNN" --version | grep -q "config files: toml++"; then
  SKIP_CLASSES[config_file]="this build reads no config files: $("$CNN" --version)"
fi
C=$FX/config
mkdir -p "$C"
printf '# a study\nepochs = 1\nlrr = 0.1\n' >"$C/unknown_key.toml"
printf 'train_samples = 100\n' >"$C/underscore.toml"
printf 'epochs = "2"\n' >"$C/int_as_string.toml"
printf 'seed = 1.5\n' >"$C/uint_as_float.toml"
printf 'lr = "fast"\n' >"$C/number_as_string.toml"
printf 'quiet = 1\n' >"$C/flag_as_int.toml"
printf 'model = 5\n' >"$C/text_as_int.toml"
printf 'data = 2026-01-01\n' >"$C/date.toml"
printf 'lr = 0.1\n[train]\nepochs = 2\n' >"$C/table.toml"
printf 'optim.lr = 0.1\n' >"$C/dotted.toml"
printf 'lr = { value = 0.1 }\n' >"$C/inline_table.toml"
printf 'epochs = [1, 2]\n' >"$C/array.toml"
printf 'lr = 0.1\nepochs = = 2\n' >"$C/malformed.toml"
printf 'epochs = 2\nepochs = 3\n' >"$C/duplicate.toml"
printf 'model = "\xff"\n' >"$C/not_utf8.toml"
printf 'seed = 99999999999999999999\n' >"$C/int_overflow.toml"
printf 'command = "fly"\n' >"$C/bad_command.toml"
printf 'config = "other.toml"\n' >"$C/nested.toml"
printf 'keep = 0\n' >"$C/keep_zero.toml"
printf 'keep = 2\n' >"$C/good.toml"
head -c 1100000 /dev/zero | tr '\0' '#' >"$C/huge.toml"
mkfifo "$C/fifo.toml"
