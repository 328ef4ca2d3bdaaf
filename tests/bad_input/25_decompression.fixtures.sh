# gzip inputs for tests/bad_input/25_decompression.cases (sourced by bad_input_test.sh: $FX, $PY).
# Bombs are made in milliseconds: after a full flush deflate starts afresh, so one MiB of zeros
# compresses to the same ~1 KB every time and is written N times. Their CRC is left wrong on purpose:
# a reader that inflated the whole bomb would meet it and say "corrupt gzip stream", not the refusal.
# $FX/gz holds about 1.8 MB; $FX/idx_gz and $FX/cifar_gz are the good fixtures, gzipped (NAME.gz).
"$PY" - "$FX" <<'PYEOF' || { echo "FAIL - 25_decompression fixtures"; exit 1; }
import gzip, os, struct, sys, zlib
fx = sys.argv[1]
os.makedirs(fx + "/gz")
def bomb(path, head, zero_mib, tail=b"", prefix=b""):
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = zlib.compressobj(9, zlib.DEFLATED, -15)  # the same raw deflate block, computed once
    mib = block.compress(bytes(1 << 20)) + block.flush(zlib.Z_FULL_FLUSH)
    with open(path, "wb") as f:
        f.write(prefix + c.compress(head) + c.flush(zlib.Z_FULL_FLUSH))
        for _ in range(zero_mib): f.write(mib)
        f.write(c.compress(tail) + c.flush())
def gz(path, data, suffix=b""):
    with open(path, "wb") as f: f.write(gzip.compress(data, mtime=0) + suffix)
images = open(fx + "/idx/train-images-idx3-ubyte", "rb").read()    # 200 images of 28x28: 156800 data bytes
labels = open(fx + "/idx/t10k-labels-idx1-ubyte", "rb").read()     # 100 labels
idx3 = lambda n, r, c: b"\0\0\x08\x03" + struct.pack(">III", n, r, c)
idx1 = lambda n: b"\0\0\x08\x01" + struct.pack(">I", n)
bomb(fx + "/gz/small_header_bomb.gz", idx3(200, 28, 28), 1024)         # 1 GiB of zeros behind a 156816-byte header
bomb(fx + "/gz/huge_header_bomb.gz", idx3(1 << 20, 1024, 1024), 256)   # declares 2^40 bytes
bomb(fx + "/gz/labels_huge_header.gz", idx1(0xFFFFFFFF), 64)            # 4 GiB - 1 labels: over the limit
bomb(fx + "/gz/second_member_bomb.gz", b"", 256, prefix=gzip.compress(images, mtime=0))
gz(fx + "/gz/declares_256mib.gz", idx1(256 << 20) + labels[8:])         # a lying header: 100 labels follow
gz(fx + "/gz/trailing_garbage.gz", images, b"garbage after the stream")
gz(fx + "/gz/extra_data_byte.gz", images + b"\0")
gz(fx + "/gz/short_data.gz", images[:-100])
gz(fx + "/gz/short_header.gz", images[:10])
gz(fx + "/gz/empty_stream.gz", b"")
gz(fx + "/gz/empty_member_after.gz", labels, gzip.compress(b"", mtime=0))  # valid: an empty second member
bomb(fx + "/gz/cifar_bomb.gz", b"", 256)                                 # label 0 records, 8.7x the format's limit
cifar = open(fx + "/cifar/data_batch_1.bin", "rb").read()
bomb(fx + "/gz/cifar_second_member_bomb.gz", b"", 256, prefix=gzip.compress(cifar, mtime=0))
gz(fx + "/gz/cifar_10001_records.gz", bytes(10001 * 3073))
for src, dst in (("idx", "idx_gz"), ("cifar", "cifar_gz")):
    os.makedirs(fx + "/" + dst)
    for name in os.listdir(fx + "/" + src):
        gz(fx + "/" + dst + "/" + name + ".gz", open(fx + "/" + src + "/" + name, "rb").read())
PYEOF
