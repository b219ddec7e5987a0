"""``python -m citeformer``: the same as the ``citeformer`` command."""

from citeformer.app.cli import run

if __name__ == "__main__":
    run()
