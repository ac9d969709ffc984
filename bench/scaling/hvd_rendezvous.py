"""Horovod's Gloo rendezvous server for one emulated job (run with Horovod's own interpreter,
inside host 0's network namespace, by emulated_cluster.py).

    hvd_rendezvous.py HOSTS  ->  prints "PORT <n>" once listening, then serves until killed.

One slot per host: host i is "h<i>", rank i, local rank 0, cross rank i (horovodrun's layout for
-H h0:1,h1:1,...).
"""
import sys
import time

from horovod.runner.common.util.hosts import SlotInfo
from horovod.runner.http.http_server import RendezvousServer


def main():
    hosts = int(sys.argv[1])
    plan = [SlotInfo(hostname="h%d" % i, rank=i, local_rank=0, cross_rank=i, size=hosts,
                     local_size=1, cross_size=hosts) for i in range(hosts)]
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(plan)
    print("PORT %d" % port, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
