"""Data-parallel Keras training on scikit-learn's bundled digits (8x8 images, 10 classes; no
download) with Horovod's Keras API on korovod.

    korovodrun -np 4 .deps/tf-venv/bin/python examples/tensorflow2_keras_digits.py

Keras 3 by default; TF_USE_LEGACY_KERAS=1 runs it on tf_keras (Keras 2). Each rank trains on its
shard of the training set with batch size --batch-size (global batch = size x batch size), the
learning rate scaled by the number of ranks; DistributedOptimizer averages the gradients, the
callbacks broadcast rank 0's variables after the first batch and average the epoch's metrics;
only rank 0 prints and saves the model. With --ranks-emulated N a single process uses global
batch N x batch size: the reference the multi-rank run must match. --module picks the import:
horovod.tensorflow.keras (tf.keras) or horovod.keras (the keras package).
"""
import argparse
import importlib
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--module", default="horovod.tensorflow.keras",
                   choices=["horovod.tensorflow.keras", "horovod.keras"])
    p.add_argument("--save", default="", help="rank 0 saves the trained model here (.keras)")
    p.add_argument("--ranks-emulated", type=int, default=0,
                   help="single process with global batch = N x batch size (reference run)")
    p.add_argument("--metrics-json", default="", help="rank 0 writes final metrics here")
    return p.parse_args()


def main():
    args = parse_args()
    hvd = importlib.import_module(args.module)
    keras = tf.keras if args.module == "horovod.tensorflow.keras" else importlib.import_module(
        "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else "keras")
    single = args.ranks_emulated > 0
    if not single:
        hvd.init()
    rank, size = (0, 1) if single else (hvd.rank(), hvd.size())
    world = args.ranks_emulated if single else size

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25,
                                                        random_state=args.seed)
    # Whole global batches only, each rank the interleaved shard: rank r's batch i and the other
    # ranks' batch i together are the single process's batch i.
    per_step = args.batch_size * world
    n = len(x_train) // per_step * per_step
    x_train, y_train = x_train[:n], y_train[:n]
    if not single:
        x_train, y_train = x_train[rank::size], y_train[rank::size]
    batch = args.batch_size * (args.ranks_emulated if single else 1)

    keras.utils.set_random_seed(args.seed)  # the same initial weights on every rank
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    opt = keras.optimizers.SGD(learning_rate=args.lr * world, momentum=0.9)
    callbacks = []
    if not single:
        opt = hvd.DistributedOptimizer(opt)
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd.callbacks.MetricAverageCallback()]
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"])

    start = time.time()
    history = model.fit(x_train, y_train, batch_size=batch, epochs=args.epochs, shuffle=False,
                        callbacks=callbacks, verbose=0)
    secs = time.time() - start
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    if rank == 0:
        for e, (l, a) in enumerate(zip(history.history["loss"], history.history["accuracy"])):
            print("epoch %2d  loss %.4f  train accuracy %.4f" % (e + 1, l, a))
        print("test accuracy %.4f  (%d ranks, global batch %d, %.0f samples/s)" % (
            acc, world, per_step, args.epochs * n / secs))
        if args.save:
            model.save(args.save)
            print("saved model to %s" % args.save)
        if args.metrics_json:
            with open(args.metrics_json, "w") as f:
                json.dump({"test_accuracy": float(acc), "test_loss": float(loss),
                           "final_train_loss": float(history.history["loss"][-1])}, f)


if __name__ == "__main__":
    main()
