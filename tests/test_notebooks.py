"""Every notebook under notebooks/ runs from top to bottom without a cell error."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "python3"


def _kernel_missing() -> str | None:
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError as e:
        return f"nbclient/nbformat/jupyter_client not installed ({e.name}): pip install -e '.[test]'"
    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        return (f"no Jupyter kernel named {KERNEL!r}: run "
                f"`python -m ipykernel install --user --name {KERNEL}`")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    missing = _kernel_missing()
    if missing:
        pytest.skip(missing)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    # The kernel is a subprocess: make the repository importable there too.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=120,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as e:
        pytest.fail(f"{path.name}: a cell failed:\n{e}", pytrace=False)


def test_there_is_a_notebook():
    assert NOTEBOOKS, "notebooks/ should hold at least the introduction"
