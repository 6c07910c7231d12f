"""python -m fa2check.ablate's command line: a bad option or a missing file named before any work."""
import pytest


@pytest.mark.parametrize("option", ["--configs-from", "--from", "--merge"])
def test_a_missing_input_file_is_named_not_traced(option, tmp_path, capsys):
    from fa2check import ablate

    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit):
        ablate.main([option, str(missing), "--plan"])
    assert f"{option} {missing}: no such file" in capsys.readouterr().err


def test_an_unknown_backend_is_named_before_any_work(capsys):
    from fa2check import ablate

    with pytest.raises(SystemExit):
        ablate.main(["--backends", "sdpa-flash,flash", "--plan"])
    assert "--backends flash: not one of sdpa-flash," in capsys.readouterr().err
