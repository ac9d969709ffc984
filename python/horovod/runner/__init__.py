"""horovod.runner on korovod: only the launcher's command line (horovod.runner.launch)."""
