app_name = "facts"

urlpatterns = []
