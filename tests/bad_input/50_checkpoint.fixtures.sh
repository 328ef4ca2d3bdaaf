# Fixtures of the checkpoint classes (50_checkpoint, 52_checkpoint_bytes, 55_checkpoint_progress), sourced
# by tests/bad_input_test.sh after its own ($FX, $CNN, $PY, COMMON; $FX/ckpt/good.h5 is the end of a
# one-epoch run: 200 images in batches of 50, so 4 steps per epoch, epoch 1, step_in_epoch 0).
#   $FX/ckpt/mid.h5          a mid-epoch checkpoint of the same run (epoch 0, step_in_epoch 3, partial stats)
#   $FX/ckpt/v1.h5           good.h5 as a version-1 file (no header, version 1, no run_id)
#   $FX/ckpt/stripped.h5     good.h5 without its 512-byte header: HDF5 that says version 2 but has no digest
#   $FX/ckpt/wrong_bytes.h5  good.h5 with a well-formed header whose bytes= is one more than the file holds
"$CNN" "${COMMON[@]}" --checkpoint-every-steps 3 --keep 5 --out "$FX/run_mid" >/dev/null 2>&1 &&
  cp "$FX/run_mid/checkpoints/ckpt-e0000-s00000003.h5" "$FX/ckpt/mid.h5" && rm -rf "$FX/run_mid" ||
  { echo "FAIL - the mid-epoch checkpoint fixture could not be made"; return 1; }
"$PY" "$SOURCE_DIR/tests/ckpt_seal.py" --v1 "$FX/ckpt/good.h5" "$FX/ckpt/v1.h5" || return 1
"$PY" - "$FX/ckpt/good.h5" "$FX/ckpt" <<'PYEOF' || return 1
import sys, zlib
good, out = sys.argv[1], sys.argv[2]
data = open(good, "rb").read()
body = data[512:]
open(out + "/stripped.h5", "wb").write(body)
line = b"cnn_mpi-checkpoint v2 crc32=%08x bytes=%d\n" % (zlib.crc32(body), len(body) + 1)
open(out + "/wrong_bytes.h5", "wb").write(line + bytes(512 - len(line)) + body)
PYEOF
