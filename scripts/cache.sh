# Sourced by the scripts: KOROVOD_CACHE, the per-machine cache that outlives a clone (so a fresh
# clone on a machine that ran CI before builds nothing twice): the Go test infrastructure by its
# pinned versions (build-testinfra.sh), the Python environments by their requirements and the CUDA
# wheels (install-deps.sh; the newest torch's venv alone is ~5.4 GB), the container images'
# debootstrap base (images-common.sh). ccache keeps its own directory (CCACHE_DIR, default
# ~/.cache/ccache). Delete the folder to start cold.
KOROVOD_CACHE="${KOROVOD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/korovod}"
export KOROVOD_CACHE
