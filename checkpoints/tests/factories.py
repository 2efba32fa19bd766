from checkpoints.services import checkpoint_put


def make_checkpoint(thread, checkpoint_id, *, ns="", parent=None, metadata=None, data=b"state"):
    checkpoint, _ = checkpoint_put(
        thread=thread,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent,
        type="msgpack",
        data=data,
        metadata=metadata or {},
    )
    return checkpoint
