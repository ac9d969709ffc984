"""Launchers of the korovod package: `horovodrun` (korovod.runner.horovodrun), Horovod's command
line on top of korovodrun."""
