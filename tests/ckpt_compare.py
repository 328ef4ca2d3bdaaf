#!/usr/bin/python3
"""Compares the datasets of two cnn_mpi checkpoints (tests/resume_test.sh).

  ckpt_compare.py exact A.h5 B.h5       every dataset bitwise identical (same names, shapes, bytes)
  ckpt_compare.py rel=1e-5 A.h5 B.h5    per dataset, max|a-b| <= tol * max|a| (summation order may differ)
  ckpt_compare.py relnorm=1e-5 A.h5 B.h5
                                        per group (/params, /optimizer, /state, ...), |a-b| / |a| over all
                                        its datasets as one vector (2-norms), as the rank-equivalence tests
                                        measure: for runs holding values that are zero but for rounding,
                                        such as the gradient, velocity and value of a bias right before a
                                        bn layer (bn removes any shift per channel), which per dataset
                                        differ by O(1) relative to themselves

Exit 0 when they agree, 1 when they do not (the worst dataset is named), 77 without h5py.
Attributes are not compared: `created` differs by design.
"""
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("ckpt_compare: h5py/numpy not available for /usr/bin/python3; skipping")
    sys.exit(77)


def datasets(path):
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return found


def main():
    mode, a_path, b_path = sys.argv[1:4]
    a, b = datasets(a_path), datasets(b_path)
    if sorted(a) != sorted(b):
        print(f"ckpt_compare: different datasets: {sorted(set(a) ^ set(b))}")
        return 1
    tol = None if mode == "exact" else float(mode.split("=", 1)[1])
    by_group = mode.startswith("relnorm=")
    group_diff, group_norm = {}, {}
    worst_name, worst = "", 0.0
    for name in sorted(a):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            print(f"ckpt_compare: /{name}: {x.shape} {x.dtype} vs {y.shape} {y.dtype}")
            return 1
        if tol is None:
            if x.tobytes() != y.tobytes():
                diff = int(np.count_nonzero(x != y))
                print(f"ckpt_compare: /{name}: {diff} of {x.size} values differ")
                return 1
            continue
        if by_group:
            group = name.split("/", 1)[0]
            d = x.astype(np.float64) - y.astype(np.float64)
            group_diff[group] = group_diff.get(group, 0.0) + float(np.sum(d * d))
            group_norm[group] = group_norm.get(group, 0.0) + float(np.sum(x.astype(np.float64) ** 2))
            continue
        scale = float(np.max(np.abs(x))) or 1.0
        err = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) / scale
        if err > worst:
            worst_name, worst = name, err
    for group in group_diff:
        err = (group_diff[group] / group_norm[group]) ** 0.5 if group_norm[group] > 0 else group_diff[group] ** 0.5
        if err > worst:
            worst_name, worst = group, err
    if tol is not None:
        print(f"ckpt_compare: largest relative difference {worst:.3g} (/{worst_name}), tolerance {tol:g}")
        if worst > tol:
            return 1
    else:
        print(f"ckpt_compare: {len(a)} datasets bitwise identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
