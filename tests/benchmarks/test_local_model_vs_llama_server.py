from __future__ import annotations


def test_local_model_vs_llama_server_tiny(run_benchmark):
    run = run_benchmark("local_model_vs_llama_server")
    result = run.results["local_model_vs_llama_server"]
    assert set(result["levels"]) == {"1", "2"}
    for level, row in result["levels"].items():
        for server in ("local_llama", "llama_server"):
            # both servers answered every request of the level, with generated tokens
            tokens = row["completion_tokens"][server]
            assert len(tokens) == int(level) and all(n > 0 for n in tokens)
            assert set(row[server]) == {"median", "min", "max"} and row[server]["median"] > 0
        assert row["ratio"]["median"] > 0
    # greedy, same prompts: both servers stop at the same token budget or the same end
    assert (
        result["levels"]["2"]["completion_tokens"]["local_llama"]
        == result["levels"]["2"]["completion_tokens"]["llama_server"]
    )
    assert result["levels"]["1"]["vs_single"] == {"local_llama": 1.0, "llama_server": 1.0}
    assert "quickstart" not in result  # the tiny size leaves the collections out
    table = run.markdown.split("## The embedded model vs llama.cpp's own server", 1)[1]
    assert (
        "| concurrent requests | local_llama tokens/s | × single | llama.cpp server tokens/s | × single | ratio |"
        in table
    )
    assert table.count("\n| 1 | ") == 1 and table.count("\n| 2 | ") == 1
    assert f"Commit {result['commit']}" in table and "Goal: local_llama at 2 concurrent" in table
