"""``python -m xlnet_tf.ops``: build the custom kernels now (into ``$XLNET_TF_OPS_DIR``) and check they load."""

import sys

from xlnet_tf import ops


def main() -> int:
    try:
        path = ops.build(verbose="-v" in sys.argv)
    except RuntimeError as error:
        print(f"xlnet_tf.ops: {error}", file=sys.stderr)
        return 1
    import tensorflow as tf

    tf.load_op_library(str(path))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
