"""``python -m xlnet_tf.cli.create_data``: text files -> pretraining TFRecords (``xlnet_tf.data.writer``)."""

if __name__ == "__main__":
    from absl import app

    # The writer's own module (not __main__) runs, so that worker functions pickle by their importable name.
    from xlnet_tf.data import writer

    writer._define_flags()
    app.run(writer.main)
