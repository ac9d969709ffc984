"""TensorFlow 2 synthetic benchmark (Horovod's flags and printout): a Keras application model
trained on random data with hvd.DistributedGradientTape inside tf.function; prints img/sec.

    korovodrun -np 2 .deps/tf-venv/bin/python examples/tensorflow2_synthetic_benchmark.py \\
        --model MobileNetV2 --batch-size 8

Runs on Keras 3 and on tf_keras (TF_USE_LEGACY_KERAS=1). --image-size shrinks the input for quick
runs (Horovod's example is fixed at 224).
"""
import argparse
import os
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow Synthetic Benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="ResNet50", help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--image-size", type=int, default=224, help="input height and width")
parser.add_argument("--num-warmup-batches", type=int, default=10,
                    help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--no-cuda", action="store_true", default=False,
                    help="disables CUDA training")
args = parser.parse_args()

hvd.init()
device = "CPU"  # korovod's TensorFlow tensors take the host path (tensorflow-cpu)

model = getattr(tf.keras.applications, args.model)(
    weights=None, input_shape=(args.image_size, args.image_size, 3))
opt = tf.keras.optimizers.SGD(0.01)
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none


def optimizer_variables():
    v = opt.variables  # a property in Keras 3, a method in Keras 2
    return list(v() if callable(v) else v)


@tf.function
def benchmark_step(first_batch):
    with tf.GradientTape() as tape:
        probs = model(data, training=True)
        loss = tf.keras.losses.sparse_categorical_crossentropy(target, probs)
    tape = hvd.DistributedGradientTape(tape, compression=compression)
    gradients = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    # After the first step, so that the optimizer's variables exist.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer_variables(), root_rank=0)


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log("Model: %s" % args.model)
log("Batch size: %d" % args.batch_size)
log("Number of %ss: %d" % (device, hvd.size()))
log("Running warmup...")
benchmark_step(first_batch=True)
timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(lambda: benchmark_step(first_batch=False),
                         number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
    img_secs.append(img_sec)
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log("Img/sec per %s: %.1f +-%.1f" % (device, img_sec_mean, img_sec_conf))
log("Total img/sec on %d %s(s): %.1f +-%.1f" %
    (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
