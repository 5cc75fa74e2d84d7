"""What every view shares: how a user's error reaches the browser and the server's log."""

from __future__ import annotations

import logging

import gradio as gr
import pytest

from vitviz.app.session import user_errors


def test_a_user_error_is_one_log_line_and_no_traceback(caplog):
    @user_errors
    def draw(patch):
        raise ValueError(f"patch must be in [0, 672), got {patch}")

    with caplog.at_level(logging.INFO, logger="vitviz"), pytest.raises(gr.Error) as raised:
        draw(5000)
    assert raised.value.message == "patch must be in [0, 672), got 5000"
    assert raised.value.print_exception is False  # Gradio's queue would print a traceback otherwise
    assert [r.getMessage() for r in caplog.records] == ["user error in draw: patch must be in [0, 672), got 5000"]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_bug_is_logged_with_its_traceback_and_named_to_the_user(caplog):
    @user_errors
    def draw():
        return {}["missing"]

    with caplog.at_level(logging.INFO, logger="vitviz"), pytest.raises(gr.Error) as raised:
        draw()
    assert "unexpected error: KeyError" in raised.value.message
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
