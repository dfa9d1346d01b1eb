"""tools/check_bench_json.py: the page-fault guard on the shm path's timed rounds.

The figures are what lmcache-bench measured on a 2-core CI VM: about 0.05
faults per MiB once the pool is resident and mapped in every worker, and 256
per MiB (one per 4 KiB page) when a worker's first copy into a page faults.
"""
import importlib.util
import pathlib

_TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "check_bench_json.py"
_spec = importlib.util.spec_from_file_location("check_bench_json", _TOOL)
check_bench_json = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_bench_json)


def test_rounds_without_faults_pass():
    samples = {"store_faults_per_mib": [0.049, 0.047, 0.041],
               "retrieve_faults_per_mib": [0.0, 0.006, 0.002]}
    assert check_bench_json.fault_problems(samples) == []


def test_a_round_that_faults_on_every_page_fails_naming_it():
    samples = {"store_faults_per_mib": [0.05, 256.0, 0.04], "retrieve_faults_per_mib": [0, 0, 0]}
    problems = check_bench_json.fault_problems(samples)
    assert len(problems) == 1
    assert "round 2" in problems[0] and "store" in problems[0] and "256.0" in problems[0]

