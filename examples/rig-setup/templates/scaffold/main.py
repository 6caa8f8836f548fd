"""A scaffold for the agent to fill in."""


def main() -> None:
    """TODO: read settings.json and print a greeting."""


if __name__ == "__main__":
    main()
