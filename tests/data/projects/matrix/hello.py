import idna
import six
from src.tinyapp.greet import greeting

print(greeting(), six.__version__, idna.__version__)
