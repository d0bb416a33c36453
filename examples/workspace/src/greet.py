import sys


def greet(name: str) -> str:
    return f"Hello, {name}!"


def main() -> None:
    print(greet(sys.argv[1] if len(sys.argv) > 1 else "world"))


if __name__ == "__main__":
    main()
