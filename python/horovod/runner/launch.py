"""horovod.runner.launch on korovod: Horovod's `horovodrun` entry point (`run_commandline`, also
`python3 -m horovod.runner.launch`), which is korovod.runner.horovodrun."""
import sys

from korovod.runner.horovodrun import main


def run_commandline():
    sys.exit(main())


if __name__ == "__main__":
    run_commandline()
