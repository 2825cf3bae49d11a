"""Which TensorFlow is installed: its pip distributions, what it was built for, its
GPUs (for --version, the device plan and benchmark tables)."""

from __future__ import annotations

from bert_ad.compat import _tf, IS_TF1, TENSORFLOW_DISTRIBUTIONS, TF_VERSION, quiet_stderr


def list_gpu_count() -> int:
    """GPUs this TensorFlow build can use (0 on a CPU-only build or machine)."""
    with quiet_stderr():
        if IS_TF1:
            from tensorflow.python.client import device_lib
            return sum(d.device_type == "GPU" for d in device_lib.list_local_devices())
        return len(_tf.config.list_physical_devices("GPU"))


def tensorflow_build() -> str:
    """What this TensorFlow was built for: "CUDA 12.5.1 / cuDNN 9 build" or "CPU build"."""
    if IS_TF1:
        from tensorflow.python.platform import build_info
        info = {"is_cuda_build": getattr(build_info, "is_cuda_build", False),
                "is_rocm_build": getattr(build_info, "is_rocm_build", False),
                "cuda_version": getattr(build_info, "cuda_version_number", None),
                "cudnn_version": getattr(build_info, "cudnn_version_number", None)}
    else:
        info = dict(_tf.sysconfig.get_build_info())
    if info.get("is_cuda_build"):
        versions = [f"{name} {info[key]}" for name, key in (("CUDA", "cuda_version"),
                                                             ("cuDNN", "cudnn_version"))
                    if info.get(key)]
        return (" / ".join(versions) or "CUDA") + " build"
    if info.get("is_rocm_build"):
        return "ROCm build"
    return "CPU build"


def tensorflow_distributions() -> list[str]:
    """The installed distributions that provide the `tensorflow` module.

    More than one (say tensorflow-gpu and tensorflow) means the later install
    overwrote the other's files.
    """
    try:
        from importlib import metadata
        found = []
        for name in TENSORFLOW_DISTRIBUTIONS:
            try:
                metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
            found.append(name)
        return found
    except ImportError:  # Python 3.7: no importlib.metadata
        import pkg_resources
        return [name for name in TENSORFLOW_DISTRIBUTIONS
                if _has_distribution(pkg_resources, name)]


def _has_distribution(pkg_resources, name: str) -> bool:
    try:
        pkg_resources.get_distribution(name)
    except pkg_resources.DistributionNotFound:
        return False
    return True


def tensorflow_description() -> str:
    """'TensorFlow 2.21.0 (tensorflow-cpu, CPU build)': for --version."""
    names = tensorflow_distributions()
    source = " + ".join(names) if names else "no pip distribution"
    return f"TensorFlow {TF_VERSION} ({source}, {tensorflow_build()})"
