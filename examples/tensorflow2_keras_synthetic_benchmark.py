"""Keras synthetic benchmark (Horovod's flags and printout): model.fit of a Keras application on
random data with hvd.DistributedOptimizer and Horovod's callbacks; prints img/sec per epoch.

    korovodrun -np 2 .deps/tf-venv/bin/python examples/tensorflow2_keras_synthetic_benchmark.py \\
        --model MobileNetV2 --batch-size 8

Runs on Keras 3 and on tf_keras (TF_USE_LEGACY_KERAS=1).
"""
import argparse
import os
from timeit import default_timer as timer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow.keras as hvd  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow Synthetic Benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="ResNet50", help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--image-size", type=int, default=224, help="input height and width")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--no-cuda", action="store_true", default=False,
                    help="disables CUDA training")
args = parser.parse_args()
device = "CPU"

hvd.init()
if hvd.rank() == 0:
    print("Model: %s" % args.model)
    print("Batch size: %d" % args.batch_size)
    print("Number of %ss: %d" % (device, hvd.size()))

model = getattr(tf.keras.applications, args.model)(
    weights=None, input_shape=(args.image_size, args.image_size, 3))
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)
dataset = tf.data.Dataset.from_tensor_slices((data, target)).cache().repeat().batch(
    args.batch_size)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01), compression=compression)
model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(), optimizer=opt)

callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
]


class TimingCallback(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.img_secs = []

    def on_train_end(self, logs=None):
        img_sec_mean = np.mean(self.img_secs)
        img_sec_conf = 1.96 * np.std(self.img_secs)
        print("Img/sec per %s: %.1f +-%.1f" % (device, img_sec_mean, img_sec_conf))
        print("Total img/sec on %d %s(s): %.1f +-%.1f" %
              (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))

    def on_epoch_begin(self, epoch, logs=None):
        self.starttime = timer()

    def on_epoch_end(self, epoch, logs=None):
        time = timer() - self.starttime
        img_sec = args.batch_size * args.num_batches_per_iter / time
        print("Iter #%d: %.1f img/sec per %s" % (epoch, img_sec, device))
        if epoch > 0:  # the first epoch traces the graph
            self.img_secs.append(img_sec)


if hvd.rank() == 0:
    callbacks.append(TimingCallback())
model.fit(dataset, steps_per_epoch=args.num_batches_per_iter, callbacks=callbacks,
          epochs=args.num_iters, verbose=0)
