"""SASRec (chapter 10): shapes, causality, padding, the tied output classes, bad inputs."""

import pytest
import torch

from candidate_sampling.models import SASRec


def _model(**kwargs):
    torch.manual_seed(0)
    options = {"max_len": 6, "num_blocks": 2, "num_heads": 2, "dropout": 0.0}
    options.update(kwargs)
    return SASRec(11, 8, **options).eval()


def test_shapes_and_tied_classes():
    model = _model()
    history = torch.tensor([[-1, -1, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10]])
    h = model(history)
    assert h.shape == (2, 6, 8)
    torch.testing.assert_close(model.user_states(history), h[:, -1])
    items = model.item_embeddings()
    assert items.shape == (11, 8)
    assert items.data_ptr() == model.item_embedding.weight.data_ptr()  # tied: one table
    scores = model.user_states(history) @ items.T
    scores.sum().backward()
    assert model.item_embedding.weight.grad[:11].abs().sum() > 0


@pytest.mark.parametrize("num_blocks, num_heads", [(1, 1), (2, 2), (3, 4)])
def test_user_states_is_forwards_last_column(num_blocks, num_heads):
    """user_states computes the last block's last query only: the same states and the same
    gradients as forward's last column, for any depth, padding and an empty row."""
    model = _model(num_blocks=num_blocks, num_heads=num_heads, max_len=7)
    g = torch.Generator().manual_seed(num_blocks)
    history = torch.randint(0, 11, (6, 7), generator=g)
    history[1, :3] = -1  # left padding
    history[2, :6] = -1  # one item
    history[3] = -1  # no item: the zero vector
    states = model.user_states(history)
    full = model(history)[:, -1]
    torch.testing.assert_close(states, full, rtol=1e-5, atol=1e-6)
    assert (states[3] == 0).all() and (states[:3].abs().sum(1) > 0).all()
    weights = torch.randn(8, generator=g)
    grads = [torch.autograd.grad((f() * weights).sum(), model.item_embedding.weight)[0]
             for f in (lambda: model.user_states(history), lambda: model(history)[:, -1])]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)
    assert grads[0].abs().sum() > 0


def test_shorter_windows_take_the_last_positions():
    model = _model()
    long = torch.tensor([[-1, -1, -1, 3, 4, 5]])
    short = torch.tensor([[-1, 3, 4, 5]])
    torch.testing.assert_close(model(long)[:, -4:], model(short), rtol=1e-5, atol=1e-6)


def test_causal_state_at_t_ignores_later_items():
    model = _model()
    g = torch.Generator().manual_seed(1)
    history = torch.randint(0, 11, (4, 6), generator=g)
    h = model(history)
    for t in range(5):
        changed = history.clone()
        changed[:, t + 1 :] = torch.randint(0, 11, changed[:, t + 1 :].shape, generator=g)
        torch.testing.assert_close(model(changed)[:, : t + 1], h[:, : t + 1])


def test_causal_gradient_has_no_path_from_the_future():
    model = _model()
    x = model.item_embedding.weight
    history = torch.tensor([[1, 2, 3, 4, 5, 6]])
    # a random projection: the final LayerNorm's outputs of one position sum to a constant
    weights = torch.randn(8, generator=torch.Generator().manual_seed(2))
    (model(history)[0, 2] * weights).sum().backward()
    grad = x.grad
    assert grad[[1, 2, 3]].abs().sum() > 0
    assert (grad[[4, 5, 6]] == 0).all()


def test_padding_is_ignored_and_zeroed():
    model = _model()
    a = torch.tensor([[-1, -1, -1, 7, 8, 9]])
    h = model(a)
    assert (h[0, :3] == 0).all()
    # a fully padded row is finite (zeros), and does not disturb the other rows
    both = model(torch.cat([a, torch.full((1, 6), -1)]))
    assert torch.isfinite(both).all() and (both[1] == 0).all()
    torch.testing.assert_close(both[0], h[0])


def test_padding_does_not_leak_through_the_padding_row():
    model = _model()
    a = torch.tensor([[-1, -1, 3, 4, 5, 6]])
    before = model(a)
    with torch.no_grad():
        model.item_embedding.weight[11] += 100.0  # the padding row
    torch.testing.assert_close(model(a), before)


def test_dropout_only_in_training_mode():
    model = _model(dropout=0.5)
    history = torch.tensor([[1, 2, 3, 4, 5, 6]])
    torch.testing.assert_close(model(history), model(history))
    model.train()
    torch.manual_seed(0)
    assert not torch.allclose(model(history), model(history))


def test_zero_blocks_is_embedding_plus_position():
    model = _model(num_blocks=0)
    out = model(torch.tensor([[2, 3]]))
    assert out.shape == (1, 2, 8)


@pytest.mark.parametrize(
    "history,message",
    [
        (torch.zeros(3, dtype=torch.long), "history must have shape"),
        (torch.zeros(2, 3), "integer tensor"),
        (torch.zeros(2, 3, dtype=torch.bool), "integer tensor"),
        (torch.zeros(2, 7, dtype=torch.long), "at most max_len = 6"),
        (torch.tensor([[0, 11]]), r"in \[0, 11\) or -1"),
        (torch.tensor([[-2, 1]]), r"in \[0, 11\) or -1"),
    ],
)
def test_bad_history(history, message):
    with pytest.raises(ValueError, match=message):
        _model()(history)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"num_heads": 3}, "divisible by num_heads"),
        ({"dropout": 1.0}, "dropout must lie"),
        ({"max_len": 0}, "max_len must be"),
        ({"init_std": 0.0}, "init_std must be"),
        ({"num_blocks": -1}, "num_blocks must be"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SASRec(11, 8, **kwargs)


def test_bad_sizes():
    with pytest.raises(ValueError, match="num_items must be"):
        SASRec(0, 8)
    with pytest.raises(ValueError, match="dim must be"):
        SASRec(5, 0)
