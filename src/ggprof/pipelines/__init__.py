"""The pipelines behind the commands: inspect -> host -> predict -> bench -> judge, composed."""
