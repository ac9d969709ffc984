"""horovod.tensorflow in a TensorFlow 1 graph (tf.compat.v1, eager off): ops in a Session,
broadcast_global_variables, the TF1 DistributedOptimizer, broadcast_object/allgather_object
through the default session. Prints "[r] rank r tf1 graph OK"."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()
import horovod.tensorflow as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
assert not hvd._executing_eagerly()
x = tf.constant([float(r + 1)] * 3)
summed = hvd.allreduce(x, op=hvd.Sum)
gathered = hvd.allgather(tf.fill([r + 1], float(r)))
w = tf.compat.v1.get_variable("w", initializer=tf.constant([float(r), 2.0 * r]))
bcast = hvd.broadcast_global_variables(0)
loss = tf.reduce_sum(w * w) * float(r + 1)
opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
train = opt.minimize(loss, var_list=[w])
with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    assert np.allclose(sess.run(summed), n * (n + 1) / 2.0)
    assert np.allclose(sess.run(gathered), np.concatenate([[float(q)] * (q + 1)
                                                           for q in range(n)]))
    sess.run(bcast)
    assert np.allclose(sess.run(w), [0.0, 0.0])  # rank 0's
    sess.run(tf.compat.v1.assign(w, [1.0, 1.0]))
    sess.run(train)
    # The averaged gradient: mean over ranks of 2 w (r + 1).
    mean = np.mean([2.0 * (q + 1) for q in range(n)])
    assert np.allclose(sess.run(w), [1.0 - 0.1 * mean] * 2), sess.run(w)
    with sess.as_default():
        assert hvd.broadcast_object({"r": r}, root_rank=n - 1) == {"r": n - 1}
        assert hvd.allgather_object(r) == list(range(n))
print("rank %d tf1 graph OK" % r, flush=True)
