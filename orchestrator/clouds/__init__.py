"""Cloud SDK helpers (boto3, Aliyun ECS SDK). Imported only by commands that touch a cloud."""
