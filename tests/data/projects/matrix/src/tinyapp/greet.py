def greeting() -> str:
    return "hello from tiny"
