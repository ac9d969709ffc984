"""Launchers of the korovod package: `horovodrun` (korovod.runner.horovodrun), Horovod's command
line on top of korovodrun, and `korovod-local-ranks` (korovod.runner.local_ranks), which runs a
worker pod's trainer command once per local rank."""
