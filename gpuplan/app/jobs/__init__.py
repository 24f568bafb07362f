"""The job side: submit and finish, the job spec, the batcher, promises, changes."""
