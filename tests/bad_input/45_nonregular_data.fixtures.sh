# Data directories for tests/bad_input/45_nonregular_data.cases (sourced by bad_input_test.sh: $FX, $PY).
# The `fifo` and `dir` ops make FIFOs and directories in a fresh copy; a symbolic link to /dev/zero and
# a Unix socket are made here once and used in place (reading them changes nothing).
# $FX/nonreg/KIND_FORMAT: the good fixture of FORMAT with one file replaced. $FX/idx_gz (the IDX fixture
# under its .gz names) comes from 25_decompression.fixtures.sh, sourced before this file.
"$PY" - "$FX" <<'PYEOF' || { echo "FAIL - 45_nonregular_data fixtures"; exit 1; }
import os, shutil, socket, sys
fx = sys.argv[1]
base = fx + "/nonreg"
os.makedirs(base)
def variant(name, source, file, kind):
    d = base + "/" + name
    shutil.copytree(source, d)
    os.remove(d + "/" + file)
    if kind == "dev_zero":
        os.symlink("/dev/zero", d + "/" + file)
    else:  # a bound Unix socket leaves its node behind
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(d + "/" + file)
        s.close()
variant("devzero_idx", fx + "/idx", "train-images-idx3-ubyte", "dev_zero")
variant("devzero_idx_gz", fx + "/idx_gz", "t10k-labels-idx1-ubyte.gz", "dev_zero")
variant("socket_idx", fx + "/idx", "t10k-labels-idx1-ubyte", "socket")
variant("devzero_cifar", fx + "/cifar", "data_batch_1.bin", "dev_zero")
variant("socket_cifar", fx + "/cifar", "test_batch.bin", "socket")
variant("devzero_h5_train", fx + "/h5", "train.h5", "dev_zero")
variant("devzero_h5_test", fx + "/h5", "test.h5", "dev_zero")
variant("socket_h5_test", fx + "/h5", "test.h5", "socket")
PYEOF
